"""The trtexec backend: the runner (:mod:`.runner`) and the parsers of trtexec's exported JSON
files, version by version (:mod:`.formats`).

Nothing is imported here, so the parsers are read without the runner.
"""
