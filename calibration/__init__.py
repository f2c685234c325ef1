"""Calibration and validation: measure the engine's costs, then how far the simulator is.

- :mod:`calibration.calibrate` — ``servesim calibrate``: the per-op grid (timed inside the
  engine's forward), whole steps on varied plans, the serving loop's overhead → a profile;
- :mod:`calibration.validate` / :mod:`calibration.report` — ``servesim validate``: the engine
  and the simulator on one scenario, joined per request; errors, summary differences, HTML;
- :mod:`calibration.vidur` — ``servesim import-vidur``: Vidur's GPU profiling CSVs → a profile.

The commands' doors are :mod:`~calibration.cli` (one ``calibrate`` and one ``validate``,
dispatching on ``--endpoint`` to :mod:`~calibration.engine_commands` or
:mod:`endpoint.commands`), their shared checks and outputs :mod:`~calibration.command_io`.
Helpers: :mod:`engine.plan_timer` (synthetic plans on the engine), :mod:`~calibration.grid`,
:mod:`~calibration.measure`, :mod:`~calibration.ops`, :mod:`~calibration.steps`,
:mod:`~calibration.loop`, :mod:`~calibration.probe`, :mod:`~calibration.fitting`. Modules that
touch the engine import torch; the package itself does not. See ``calibration/README.md``.
"""
