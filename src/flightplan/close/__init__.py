"""close stage of flightplan: the results directory, its verification and the report.

Modules (each imported where used, so the runner's ``publish_*`` calls stay light):

- :mod:`.results`   publish_plan / publish_data_check / publish_run (called during the run)
- :mod:`.manifest`  MANIFEST.json: hashing, atomic writes, locked rewrites
- :mod:`.verify`    ``flightplan verify``: every check as a finding
- :mod:`.acceptance` which runs delivered an accepted product; variant comparisons
- :mod:`.analysis`  error analysis per run
- :mod:`.conclusion` paired-bootstrap comparison and the verdict
- :mod:`.budget`    budget.json
- :mod:`.plan_vs_execution` the original plan next to what happened
- :mod:`.report`    report.html and README.md (jinja2 templates in ``templates/``)
- :mod:`.commands`  the ``close`` and ``verify`` verbs
"""
