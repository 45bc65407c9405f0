"""Publishing into ``results/``: the one writer of the results directory and its manifest.

Both stages write here: ``run`` publishes the plan, the data check and each run as soon as
it ends (:mod:`.results`); ``close`` adds its reports through the same manifest writer
(:mod:`.manifest`), and ``verify`` reads the manifest back. Nothing here imports ``run/``
or ``close/``.
"""
