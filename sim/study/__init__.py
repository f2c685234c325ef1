"""Studies: many simulations of one base scenario, to answer a planning question.

``schema.load_study`` reads a study file, ``plan.plan_study`` expands and validates its
configurations, ``driver.execute_plan`` runs them on a runner (in-process, local pool, Ray)
with resume (``store``: one checksummed record a run), and ``report.write_outputs`` writes the
tables, the answer and report.html. ``estimate`` sizes a study before it runs; ``lifetime`` keeps
its worker processes from outliving it.
(Import the modules themselves: this package imports nothing, so the CLI starts fast.)
"""
