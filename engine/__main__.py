"""``python -m engine "The capital of France is"``: greedy SmolLM2 generation (a demo)."""

from engine.generate import main

main()
