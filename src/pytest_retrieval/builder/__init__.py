"""Building a golden set from nothing: read a corpus (``corpus``), generate queries from it
with an LLM (``synth``), judge the pooled top hits of several runs (``pool``) into a review
file (``review_file``), review it on a local page (``review_server``, ``review_page/``), and
merge the decisions into the golden set (``apply``). Library code: the CLI's ``synth``,
``pool``, ``review`` and ``apply`` commands are thin wrappers over it."""
