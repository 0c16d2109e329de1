"""The pytest face beside the entry point (:mod:`pytest_roofline.plugin`, the hooks): the fixtures,
the run's session (:mod:`.session`), the plugin's own hooks (:mod:`.hookspec`) and its settings
(:mod:`.options`, whose parsers the ``roofline`` command shares).

Nothing is imported here: the ``roofline`` command reads the option parsers without pytest.
"""
