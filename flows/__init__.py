"""Prefect flows: ``ingest``, ``collect``, ``reward``, ``export``, ``train``, ``evaluate`` and
``iterate`` (the nightly loop). Each flow only sequences tasks from :mod:`tasks`; parameters
are pydantic models, so the UI and ``prefect deployment run --param`` validate them.
"""
