"""The layout that decodes each file's next images is worked out once per batch: what the
typed step tells ``NextLayouts`` is what the lifecycle step gets, without reading anything."""

from __future__ import annotations

import pytest

from pipeline.config import Settings
from pipeline.spark.typed import stream_layouts
from pipeline.spark.typed.stream_layouts import NextLayouts
from pipeline.spark.typed.tables import decode_spec


def test_the_typed_steps_answer_is_reused_for_its_batch_only(
        test_settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[int] = []
    monkeypatch.setattr(stream_layouts, "current_layouts",
                        lambda spark, settings, batch, batch_id: asked.append(batch_id) or {})
    lay = test_settings.layouts[0]
    layouts = NextLayouts()
    layouts.known(7, {lay.table_suffix(): decode_spec(test_settings, lay)})
    # the conf layout, named "conf" as current_layouts names it
    assert layouts.of(None, test_settings, None, 7) == {  # type: ignore[arg-type]
        lay.table_suffix(): (lay.conf_layout(), "conf")}
    assert asked == []
    layouts.of(None, test_settings, None, 8)  # type: ignore[arg-type]
    layouts.of(None, test_settings, None, 8)  # type: ignore[arg-type]
    assert asked == [8]  # another batch: worked out again, once
