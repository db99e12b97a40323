"""Deployment steps: the ``pull`` step that runs a flow from the checkout, found at run time.

``prefect.yaml`` names :func:`set_checkout_directory` as its pull step. Unlike
``set_working_directory`` with a path filled in by ``prefect deploy``, it decides when the flow
run starts: ``$KNOWLYR_CHECKOUT`` in the worker's environment, else the checkout this package
is imported from (the worker's virtual environment is an editable install of it). A checkout
that moved (and its venv rebuilt there) needs no redeploy.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["CHECKOUT_ENV", "checkout_directory", "set_checkout_directory"]

CHECKOUT_ENV = "KNOWLYR_CHECKOUT"


def checkout_directory() -> Path:
    """``$KNOWLYR_CHECKOUT``, else the directory that holds this ``flows`` package.

    Raises:
        FileNotFoundError: the directory holds no ``prefect.yaml`` (not a knowlyr-gym checkout).
    """
    given = os.environ.get(CHECKOUT_ENV)
    root = Path(given).expanduser() if given else Path(__file__).resolve().parents[1]
    if not (root / "prefect.yaml").is_file():
        where = f"${CHECKOUT_ENV}={given}" if given else f"the installed package's {root}"
        raise FileNotFoundError(
            f"{where} is not a knowlyr-gym checkout (no prefect.yaml): set {CHECKOUT_ENV} in the "
            "worker's environment to the checkout to run flows from"
        )
    return root.resolve()


def set_checkout_directory() -> dict[str, str]:
    """Pull step: change into the checkout (see :func:`checkout_directory`)."""
    root = checkout_directory()
    os.chdir(root)
    return {"directory": str(root)}
