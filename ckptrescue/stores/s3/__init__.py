"""S3 integrity: server-side checksums, version history, known-good restore (read-only).

Modules: ``client`` (the read-only boto3 client — the one place that refuses writes),
``checksums`` and ``integrity`` (pure: algorithms, forms, plans and checks), ``objects`` (HEAD,
part layouts, versions, verified downloads), ``verify``, ``history`` (+ ``manifest``,
``cloudtrail``), ``preflight``, ``preserve``, ``restore``, ``urls`` and ``localserver`` (moto on
127.0.0.1 for tests and drills). Nothing here imports boto3 at module import time.
"""
