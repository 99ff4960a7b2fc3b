"""Child-side scripts run by ``ckptrescue.effects.sandbox`` (never imported by the parent).

Each module reads ``sys.argv[1]`` (a JSON request file) and prints one JSON object on stdout,
with ``"ok": true|false``.
"""
