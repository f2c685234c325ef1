"""Studies: many simulations of one base scenario, to answer a planning question.

``load_study`` reads a study file, ``plan_study`` expands and validates its configurations,
``execute_plan`` runs them on a runner (in-process, local pool, Ray) with resume, and
``write_outputs`` writes the tables, the answer and report.html.
"""

from sim.study.driver import StudyRun, execute_plan
from sim.study.plan import Plan, plan_study
from sim.study.schema import Study, StudyError, load_study

__all__ = ["Plan", "Study", "StudyError", "StudyRun", "execute_plan", "load_study",
           "plan_study"]
