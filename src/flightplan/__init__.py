"""flightplan: buy a decision, not an endless series of runs.

Plan a small training campaign on flat-rate GPU rental packages, run it with
checkpoints that provably resume and stop rules written in advance, and close it
with a results directory anyone can re-verify. See README.md.
"""

__version__ = "0.1.0"
