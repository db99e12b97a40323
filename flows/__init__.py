"""Prefect flows: ``ingest``, ``collect``, ``reward``, ``export``, ``train``, ``evaluate`` and
``iterate`` (the nightly loop). Each flow only sequences tasks from :mod:`tasks`; parameters
are pydantic models, so the UI and ``prefect deployment run --param`` validate them.
"""

import logging

# knowlyr's own loggers (training progress: ``knowlyr.train``) reach the run log at INFO when
# Prefect forwards them (PREFECT_LOGGING_EXTRA_LOGGERS=knowlyr, set by the Makefile and the
# deployments); a library leaves its loggers' levels to the application, and the flows are it.
logging.getLogger("knowlyr").setLevel(logging.INFO)
