"""The floor every layer stands on: atomic file writes and locks (``io``), the strict JSON
reader (``json``), the secret scrubber (``scrub``), the shared event loop (``loop``), traceback
capture (``stacks``), the JSON-lines answer cache (``cache``) and garbage-collector pauses
(``gc``). Nothing here imports anything of ours but ``errors``."""
