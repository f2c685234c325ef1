"""The ``servesim`` command line: ``app`` parses and dispatches, ``console`` prints, ``bench``
measures the simulator itself, ``commands`` finds the commands other packages add."""
