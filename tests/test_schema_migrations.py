"""The one migration registry: a step per format and version, registered where its type lives."""

from __future__ import annotations

import pytest

from pytest_roofline import schema


def test_each_format_has_a_step_to_its_current_version():
    import pytest_roofline.gate.baseline  # noqa: F401  (registers the baseline file's step)
    import pytest_roofline.results  # noqa: F401  (registers the results document's step)

    for fmt, current in schema.CURRENT.items():
        assert set(schema.MIGRATIONS[fmt]) == set(range(2, current + 1)), fmt


def test_a_second_step_to_the_same_version_is_refused_but_a_reimported_one_is_kept(monkeypatch):
    monkeypatch.setitem(schema.MIGRATIONS, "probe-format", {})

    def step(data):
        return data

    schema.migration("probe-format", 2)(step)
    schema.migration("probe-format", 2)(step)  # the module imported anew (pytester's inline runs)
    assert schema.MIGRATIONS["probe-format"][2] is step

    def other(data):
        return data

    with pytest.raises(ValueError, match="two migrations of probe-format to schema_version 2"):
        schema.migration("probe-format", 2)(other)
