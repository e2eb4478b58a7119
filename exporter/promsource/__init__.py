"""Diagnose from Prometheus: the raw ``vllm:`` series of a metrics store, rebuilt into the same
snapshots the sidecar scrapes, fed through the same pipeline.

``client`` talks to the HTTP API (auth, TLS, tenant header, one-line errors), ``timespec``
reads the times a user types, ``rebuild`` turns stored samples into :class:`Snapshot` inputs,
``history`` evaluates a span step by step (``diagnose --prometheus``), ``central`` is the
fleet loop behind ``serve --prometheus``.
"""
