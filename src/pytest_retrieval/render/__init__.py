"""Rendering: every output prints the results and their Verdict; none decides anything.

- ``text``: how a number, a change, an interval, a p-value, a title or a fix command is spelt
  (a leaf, shared by all).
- ``rows``: the format-neutral model -- an evaluation's tables as rows of cells with a status
  per piece, the notes under them, the worst queries, the judge's bill, the gate's blind spot.
- ``terminal``: the summary section, the A/B tables and the failure message of a failed
  evaluation, as plain text.
- ``markdown``: the GitHub-flavoured summary (PR comment, ``$GITHUB_STEP_SUMMARY``).
- ``html``: the self-contained HTML page; ``charts`` draws its SVG curves and histograms.
- ``json``: the JSON report (``schema/report.schema.json``), compact and written atomically.
- ``junit``: the JUnit XML of ``combine`` and ``eval``, and the ``<property>`` pairs the
  plugin gives its tests, as the installed pytest's ``--junitxml`` writes them.

Dependencies point one way: ``text <- rows <- terminal, markdown, html``, ``charts <- html``,
``terminal <- junit`` (its failure text); ``json`` stands alone. Nothing here imports pytest,
the session or the plugin.
"""
