"""The engine: plans of actions run as events (``executor``), the action contract (``action``),
events, typed step outputs (``outputs``), reading a case's outputs back (``case_outputs``) and
the one-line answer (``answer``)."""
