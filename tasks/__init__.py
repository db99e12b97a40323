"""Prefect tasks: one per pipeline stage, each a few lines around one knowlyr library call.

Every stage task is cached with :data:`tasks._cache.STAGE_CACHE` (stage + parameters + input
store versions + library version), takes parameters and store manifests, and returns a
manifest, never the data itself.
"""
