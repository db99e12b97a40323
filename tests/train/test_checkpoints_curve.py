"""A trained checkpoint keeps its loss curve and the last step's loss beside TRL's mean."""

from __future__ import annotations

from knowlyr.train.checkpoints import CURVE_POINTS, _final_metrics, loss_curve
from knowlyr.train.run import TrainResult


def test_the_curve_keeps_train_and_eval_loss_by_step():
    history = [
        {"step": 1, "loss": 3.0, "learning_rate": 1e-3},
        {"step": 2, "loss": 1.0},
        {"step": 2, "eval_loss": 1.5},
        {"step": 2, "train_loss": 2.0, "train_runtime": 1.0},
    ]
    assert loss_curve(history) == {
        "train loss": [(1.0, 3.0), (2.0, 1.0)],
        "eval loss": [(2.0, 1.5)],
    }


def test_a_long_curve_is_thinned_to_its_limit_keeping_both_ends():
    history = [{"step": i, "loss": 1.0 / i} for i in range(1, 2001)]
    pts = loss_curve(history)["train loss"]
    assert len(pts) == CURVE_POINTS
    assert pts[0] == (1.0, 1.0) and pts[-1] == (2000.0, 1.0 / 2000)


def test_last_loss_is_the_last_logged_step_not_trls_mean():
    result = TrainResult(
        path="/nowhere",
        metrics={"train_loss": 1.919, "eval_loss": 0.4997, "note": "text is dropped"},
        seconds=1.0,
        log_history=[{"step": 10, "loss": 3.0}, {"step": 20, "loss": 0.485}],
    )
    metrics = _final_metrics(result)
    assert metrics == {"train_loss": 1.919, "eval_loss": 0.4997, "last_loss": 0.485}
