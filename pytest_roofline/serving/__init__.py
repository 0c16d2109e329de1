"""Serving scenarios under MLPerf LoadGen: tail latency and throughput (docs/serving.md).

types.py (ScenarioSettings, ScenarioResult), logs.py (LoadGen's summary and detail logs read back),
runner.py (run_scenario and its Server QPS search), compare.py (paired old/new comparison),
table.py (roofline load's text).  Imports nothing: LoadGen loads with the runner.
"""
