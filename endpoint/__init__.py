"""Calibrate and validate servesim against any OpenAI-compatible server (vLLM, SGLang, ...).

No torch here: a planner who only simulates can import it. The load generator needs aiohttp
(``pip install 'servesim[endpoint]'``).
"""
