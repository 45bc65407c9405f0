"""Calibration: plan a campaign from what an earlier one measured, and say what is left
uncertain.

``flightplan close`` writes ``results/calibration.json``: per run, what it was (task and
code version, params, ``[base_model]``, corpus files and view, the base model's exact
revision) and what it measured (observed duration from plan versus execution; load, steps,
seconds per step and per token, evaluations, checkpoint save stall, persist, restore and
transfer, from its measurement rows), the stages' planned and observed durations, and the
pilot's figures. ``flightplan plan SPEC --from RESULTS_DIR`` (or ``[calibrate] from``)
reads it back (the command layer reads the files and refuses a directory that does not
verify) and takes each figure in place of the campaign file's guess where it applies.

One module a job, each importing only those listed before it:

- :mod:`.record`: ``calibration.json``'s layout, owned by :class:`.record.Calibration`
  (written with ``to_json``, read with ``from_json``).
- :mod:`.measure`: what ``close`` puts in it (:func:`.measure.calibration_record`,
  :func:`.measure.run_figures`).
- :mod:`.estimate`: one figure the plan rests on, its range and where it came from
  (:class:`.estimate.Estimate`: measured, scaled or guess).
- :mod:`.matching`: which measured run or stage a new one matches, and a measured run's
  time scaled to other work (each stage's and run's duration estimate).
- :mod:`.power_models`: each comparison's model of paired outcomes (measured from the
  earlier campaign's predictions, else the file's guess) and seed spread.
- :mod:`.calibrate`: every estimate of a new campaign (:func:`.calibrate.calibrate`).
- :mod:`.retime`: the hours each estimate can move, by re-timing the plan's sequence
  (:func:`.retime.uncertainties`).

Pure functions over typed values (rows, dicts read from JSON, the spec): the command layer
reads the files (:mod:`flightplan.plan.commands`), ``close`` writes them.

Usage::

    record = calibration_record(spec, runs=..., trials=..., rows=..., ...)  # close
    calibration = Calibration.from_json(json.loads(text), source="results/calibration.json")
    calibrated = calibrate(spec, calibration, code_versions={"control": "3", ...},
                           predictions={run_id: Predictions, ...})
    result = plan_campaign(spec, durations=calibrated.durations)
    uncertain, measured = uncertainties(result.schedule, calibrated.estimates)
"""
