"""The zoo's real clients (``zoo/clients.py``): listed without importing their packages. Their
plans are checked with every zoo model (``test_plan.py``), their runs in
``test_real_clients.py`` and their ``.pte`` in ``test_executorch_pte.py``."""

from __future__ import annotations

import importlib.util

import pytest
from zoo_programs import listed_in_a_fresh_process

CLIENTS = ["diffusers_sd3", "diffusers_unet", "diffusers_vae_decoder", "yolov8n"]


@pytest.mark.skipif(any(importlib.util.find_spec(p) is None
                        for p in ("diffusers", "ultralytics")),
                    reason="pip install 'tensorplan[clients]'")
def test_zoo_lists_the_clients_without_importing_them() -> None:
    listed = listed_in_a_fresh_process(("diffusers_", "yolo"), ("diffusers", "ultralytics"))
    assert listed == (CLIENTS, {"diffusers": False, "ultralytics": False})
