"""Serving scenarios under MLPerf LoadGen: tail latency and throughput (docs/serving.md).

types.py (ScenarioSettings, ScenarioResult), logs.py (LoadGen's summary and detail logs read back),
runner.py (run_scenario, find_max_qps).  Imports nothing: LoadGen loads with the runner.
"""
