"""A run's results: the step log (``steplog``), per-request metrics and the summary
(``metrics``), the HTML report (``report``, its charts as plain plotly.js figures: ``chart``),
written together and atomically (``write``, ``atomic``)."""
