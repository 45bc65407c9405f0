"""Executors: where the runs of a campaign execute, behind one contract
(:mod:`flightplan.run.executors.contract`): local processes (:mod:`.local`) or Ray nodes,
one per flight (:mod:`.ray_executor` at home, :mod:`.ray_host` on the flight,
:mod:`.transfer` for the files that come home), and when a run must leave a flight whose
package ends (:mod:`.leave_watch`)."""
