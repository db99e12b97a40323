"""``python -m knowlyr``: the ``knowlyr`` command (its help and errors say ``knowlyr``)."""

from knowlyr.cli import app

app(prog_name="knowlyr")
