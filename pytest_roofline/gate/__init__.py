"""The regression gate, free of pytest: the request of one test (:mod:`.request`), the decision
order (:mod:`.order`), the verdict statistics (:mod:`.verdict`), the drift probe and sampling loop,
paired comparison (:mod:`.paired`) and the baseline store with its policy (:mod:`.store`).

Nothing is imported here: the plugin reads the request builder at start without numpy.
"""
