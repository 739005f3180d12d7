"""The HTML report in a real browser: Debian's headless Chromium, driven by selenium.

Each page is opened from ``file://``; the tests hover a rectangle and read its tooltip, click
it, sort and filter the table, move a dynamic dim's slider, time the page on a 10,000-buffer
plan, and check a screenshot of the chart is a drawing, not a blank canvas.
"""

from __future__ import annotations

import io
import random
import re
import shutil
import subprocess
import sys

import pytest
import torch
from PIL import Image
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.action_chains import ActionChains
from selenium.webdriver.common.by import By
from shared_models import Branches

import tensorplan as tp
from tensorplan import zoo
from tensorplan.report import write_html
from tensorplan.report.banks import bank_rows, cost_text
from tensorplan.report.figures import plan_numbers
from tensorplan.report.geometry import KIND_COLOURS, peak
from tensorplan.report.glossary import GLOSSARY
from tensorplan.report.html import value_ops
from tensorplan.report.text import bytes_text, human_bytes, shape_text


@pytest.fixture(scope="module")
def browser():
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    yield driver
    driver.quit()


@pytest.fixture(scope="module")
def tiny_gpt() -> tp.Program:
    e = zoo.example("tiny_gpt")
    return tp.compile(e.model, e.args, dynamic_shapes=e.dynamic_shapes)


def _open(browser, path) -> dict:
    """Load the page; fail on any console error; the page's data."""
    browser.get(path.as_uri())
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    return browser.execute_script("return window.tensorplanReport.data")


def _hover(browser, storage: int) -> str:
    """Move the mouse to the middle of a storage's rectangle; the tooltip's text."""
    x, y = browser.execute_script("return window.tensorplanReport.pointOf(arguments[0])", storage)
    canvas = browser.find_element(By.ID, "over")
    size = canvas.size
    ActionChains(browser).move_to_element_with_offset(
        canvas, round(x - size["width"] / 2), round(y - size["height"] / 2)).perform()
    tip = browser.find_element(By.ID, "tip")
    assert tip.is_displayed()
    return tip.text


def _column(browser, index: int) -> list[str]:
    return [row.find_elements(By.TAG_NAME, "td")[index].text
            for row in browser.find_elements(By.CSS_SELECTOR, "#storage-rows tr")]


def _bytes(text: str) -> int:
    return int(text.removesuffix(" B").replace(",", ""))


def test_hover_shows_the_values_offset_size_and_lifetime(browser, tiny_gpt, tmp_path):
    write_html(tiny_gpt, tmp_path / "page.html", "tiny_gpt")
    _open(browser, tmp_path / "page.html")
    largest = max(tiny_gpt.plan.storages.values(), key=lambda s: (s.size, -s.id))
    name = largest.values[0]
    spec = dict(tiny_gpt.specs.tensors())[name]
    lines = _hover(browser, largest.id).splitlines()
    assert lines[:3] == [f"storage {largest.id} · activation",
                         f"offset {largest.offset:,} B · size {largest.size:,} B (256.0 KiB)",
                         f"lifetime: steps [{largest.start}, {largest.end})"]
    shape = shape_text(spec, tiny_gpt.specs.dim_names)
    assert lines[3] == (f"{name} {value_ops(tiny_gpt)[name]} · float32[4, seq=128, seq=128] · "
                        f"dim_order (0, 1, 2) · {spec.nbytes:,} B")  # at the slider's sizes
    assert shape == "[4, seq<=128, seq<=128]"


def test_click_selects_the_storage_and_lists_every_value_in_it(browser, tiny_gpt, tmp_path):
    write_html(tiny_gpt, tmp_path / "page.html", "tiny_gpt")
    _open(browser, tmp_path / "page.html")
    shared = max(tiny_gpt.plan.storages.values(), key=lambda s: (len(s.values), -s.id))
    assert len(shared.values) >= 2  # a value and its views
    _hover(browser, shared.id)
    ActionChains(browser).click().perform()
    panel = browser.find_element(By.ID, "selected").text.splitlines()
    assert panel[0] == f"Storage {shared.id} (activation): {len(shared.values)} values share it"
    assert [line.split(" ")[0] for line in panel[2:]] == list(shared.values)
    chosen = browser.find_elements(By.CSS_SELECTOR, "#storage-rows tr.chosen")
    assert [row.get_attribute("data-id") for row in chosen] == [str(shared.id)]


def test_the_summary_and_the_peak_panel(browser, tiny_gpt, tmp_path):
    write_html(tiny_gpt, tmp_path / "page.html", "tiny_gpt")
    _open(browser, tmp_path / "page.html")
    numbers = {box.find_element(By.TAG_NAME, "span").text: box.find_element(By.TAG_NAME, "b").text
               for box in browser.find_elements(By.CSS_SELECTOR, "#summary .number")}
    plan = tiny_gpt.plan
    assert numbers["arena"] == "655,872 B (640.5 KiB)" == numbers["lower bound"]
    assert numbers["ratio"] == "1.000 (arena / lower bound)"
    assert (numbers["algorithm"], numbers["optimal"]) == (plan.algorithm, "yes")
    top = peak(plan)
    assert numbers["peak step"] == str(top.step)
    live = browser.find_elements(By.CSS_SELECTOR, "#peak tbody tr")
    assert [row.get_attribute("data-id") for row in live] == [str(i) for i in top.storages]
    sizes = [plan.storages[i].size for i in top.storages]
    assert sizes == sorted(sizes, reverse=True) and sum(sizes) == plan.lower_bound_bytes


def test_the_table_sorts_by_size_lifetime_and_offset_and_filters_by_name(browser, tiny_gpt,
                                                                         tmp_path):
    write_html(tiny_gpt, tmp_path / "page.html", "tiny_gpt")
    _open(browser, tmp_path / "page.html")
    storages = tiny_gpt.plan.storages.values()
    sizes = [_bytes(t) for t in _column(browser, 4)]
    assert sizes == sorted((s.size for s in storages), reverse=True)  # the default order
    head = {th.get_attribute("data-key"): th
            for th in browser.find_elements(By.CSS_SELECTOR, "#storage-head th")}
    head["lifetime"].click()
    assert [int(t) for t in _column(browser, 7)] == sorted((s.end - s.start for s in storages),
                                                           reverse=True)
    browser.find_element(By.CSS_SELECTOR, '#storage-head th[data-key="offset"]').click()
    browser.find_element(By.CSS_SELECTOR, '#storage-head th[data-key="offset"]').click()
    assert [_bytes(t) for t in _column(browser, 3)] == sorted(s.offset for s in storages)
    assert browser.find_element(By.CSS_SELECTOR, '#storage-head th[data-key="offset"]') \
        .get_attribute("aria-sort") == "ascending"
    browser.find_element(By.ID, "filter").send_keys("addmm")
    matching = [s for s in storages if any("addmm" in v for v in s.values)]
    assert sorted(int(t) for t in _column(browser, 0)) == sorted(s.id for s in matching)
    assert browser.find_element(By.ID, "table-note").text == (
        f"showing {len(matching)} of {len(matching)} matching storages "
        f"({len(tiny_gpt.plan.storages)} in all)")


def test_a_screenshot_of_the_chart_is_a_drawing(browser, tiny_gpt, tmp_path):
    write_html(tiny_gpt, tmp_path / "page.html", "tiny_gpt")
    _open(browser, tmp_path / "page.html")
    image = Image.open(io.BytesIO(browser.find_element(By.ID, "base").screenshot_as_png))
    pixels = list(image.convert("RGB").getdata())
    green = tuple(int(KIND_COLOURS["activation"][i:i + 2], 16) for i in (1, 3, 5))
    share = sum(p == green for p in pixels) / len(pixels)
    assert 0.1 < share < 0.9
    assert len(set(pixels)) > 20  # axes, text, edges, the peak band


def test_subgraph_storages_sit_in_their_region(browser, tmp_path):
    program = tp.compile(Branches(), (torch.randn(8, 8), torch.randn(1)))
    write_html(program, tmp_path / "page.html", "branches")
    data = _open(browser, tmp_path / "page.html")
    (region,) = data["regions"]
    exp = next(s for s in data["storages"] if s["values"][0] == "true_graph_0/exp")
    assert region["x0"] <= exp["x0"] < exp["x1"] <= (region["x0"] + region["x1"]) / 2
    lines = _hover(browser, exp["id"]).splitlines()
    assert lines[2] == f"lifetime: steps [{exp['start']}, {exp['end']}) of true_graph_0/"
    assert lines[3].startswith("true_graph_0/exp aten.exp.default · float32[8, 8]")


def _dsa_instance(path, count: int) -> None:
    rng = random.Random(0)
    rows = ["id,lower,upper,size"]
    for i in range(count):
        start = rng.randrange(0, 2 * count)
        rows.append(f"b{i},{start},{start + rng.randrange(1, 200)},{rng.randrange(1, 64) * 64}")
    path.write_text("\n".join(rows) + "\n")


def test_a_10000_buffer_plan_stays_responsive(browser, tmp_path):
    _dsa_instance(tmp_path / "big.csv", 10_000)
    done = subprocess.run([sys.executable, "-m", "tensorplan", "dsa", str(tmp_path / "big.csv"),
                           "--algorithm", "greedy", "--html", str(tmp_path / "big.html")],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    data = _open(browser, tmp_path / "big.html")
    assert len(data["storages"]) == 10_000
    timings = browser.execute_script("return window.tensorplanReport.timings")
    assert timings["page"] < 2000 and timings["draw"] < 500 and timings["table"] < 500, timings
    assert len(browser.find_elements(By.CSS_SELECTOR, "#storage-rows tr")) == 500
    assert browser.find_element(By.ID, "table-note").text.startswith(
        "showing 500 of 10,000 matching storages")
    largest = max(data["storages"], key=lambda s: (s["size"] * (s["end"] - s["start"]), -s["id"]))
    assert _hover(browser, largest["id"]).startswith(f"buffer {largest['values'][0]}\n")
    per_move = browser.execute_script("""
        const canvas = document.getElementById("over");
        const box = canvas.getBoundingClientRect();
        const started = performance.now();
        for (let i = 0; i < 50; ++i) {
          canvas.dispatchEvent(new MouseEvent("mousemove", {
            clientX: box.left + 100 + 20 * i, clientY: box.top + 200, bubbles: true}));
        }
        return (performance.now() - started) / 50;""")
    assert per_move < 50


def test_the_page_loads_nothing_from_anywhere(browser, tiny_gpt, tmp_path):
    write_html(tiny_gpt, tmp_path / "page.html", "tiny_gpt")
    text = (tmp_path / "page.html").read_text()
    assert not re.search(r"""(src|href)\s*=|url\(|@import|fetch\(|XMLHttpRequest""", text)
    _open(browser, tmp_path / "page.html")
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0


@pytest.mark.slow
def test_mobilenet_v2_page_with_300_storages(browser, tmp_path):
    e = zoo.example("hf_mobilenet_v2")  # one storage per value: 300+ storages on the page
    program = tp.compile(e.model, e.args, reuse=False, reorder=False, fold=False)
    write_html(program, tmp_path / "page.html", "hf_mobilenet_v2")
    data = _open(browser, tmp_path / "page.html")
    assert len(data["storages"]) == len(program.plan.storages) > 300
    timings = browser.execute_script("return window.tensorplanReport.timings")
    assert timings["page"] < 2000, timings
    largest = max(program.plan.storages.values(), key=lambda s: (s.size, -s.id))
    assert _hover(browser, largest.id).splitlines()[0] == f"storage {largest.id} · activation"


def test_each_bank_has_its_own_axis_bound_traffic_capacity_and_cost(browser, tmp_path):
    from test_banks import _hot

    prog, _ = _hot()
    write_html(prog, tmp_path / "banks.html", "hot")
    data = _open(browser, tmp_path / "banks.html")
    plan = prog.plan
    assert [(b["name"], b["arena"], b["lower_bound"], b["capacity"], b["traffic"], b["cost"])
            for b in data["banks"]] == [
        (b.name, b.arena_bytes, b.lower_bound_bytes, b.capacity, b.traffic_bytes, cost_text(b))
        for b in plan.banks]
    panels = browser.execute_script("return window.tensorplanReport.panels()")
    assert [p["bank"] for p in panels] == ["sram", "dram"]
    assert panels[0]["bottom"] < panels[1]["top"]  # apart, one above the other
    for panel, bank in zip(panels, plan.banks, strict=True):  # each drawn to its own bytes
        top = max(bank.arena_bytes, bank.lower_bound_bytes) * 1.08
        assert (panel["y0"], panel["y1"]) == (0, top)
    drawn = {s["id"]: s for s in data["storages"]}
    exp = plan.storages[prog.specs["exp"].storage]
    assert (drawn[exp.id]["offset"], drawn[exp.id]["bank"]) == (exp.offset, "dram")
    x, y = browser.execute_script("return window.tensorplanReport.pointOf(arguments[0])", exp.id)
    assert panels[1]["top"] <= y <= panels[1]["bottom"]
    tip = _hover(browser, exp.id)
    assert f"storage {exp.id} · activation · bank dram" in tip
    assert f"offset {exp.offset:,} B" in tip
    table = browser.find_element(By.ID, "bank-table")
    assert [th.text for th in table.find_elements(By.CSS_SELECTOR, "th")] == [
        "bank", "capacity", "arena", "lower bound", "constants", "traffic", "share", "cost"]
    cells = [[td.text for td in row.find_elements(By.TAG_NAME, "td")]
             for row in table.find_elements(By.CSS_SELECTOR, "tbody tr")]
    assert cells == [list(row) for row in bank_rows(plan)]
    sram = dict(zip(["bank", "capacity", "arena", "lower bound", "constants", "traffic", "share",
                     "cost"], cells[0], strict=True))
    assert sram["traffic"] == bytes_text(plan.banks[0].traffic_bytes)
    assert sram["capacity"] == bytes_text(plan.banks[0].capacity)
    assert sram["cost"] == f"{plan.banks[0].traffic_bytes * plan.banks[0].cost:,.0f} (x1)"
    assert browser.find_element(By.ID, "bank-title").text.startswith(
        f"memory banks: traffic cost {plan.traffic_cost:,.0f}")
    for term in ("traffic", "capacity", "cost"):
        assert GLOSSARY[term] in browser.find_element(By.ID, "glossary").text
    head = [th.get_attribute("data-key")
            for th in browser.find_elements(By.CSS_SELECTOR, "#storage-head th")]
    banks = _column(browser, head.index("bank"))
    assert sorted(set(banks)) == ["dram", "sram"] and len(banks) == len(plan.storages)


def _summary(browser) -> dict[str, str]:
    return {box.find_element(By.TAG_NAME, "span").text: box.find_element(By.TAG_NAME, "b").text
            for box in browser.find_elements(By.CSS_SELECTOR, "#summary .number")}


def _set_dim(browser, name: str, size: int) -> None:
    browser.execute_script("""
        const input = document.getElementById("dim-" + arguments[0]);
        input.value = arguments[1];
        input.dispatchEvent(new Event("input"));""", name, size)


def test_the_seq_slider_draws_the_plan_at_that_size(browser, tiny_gpt, tmp_path):
    write_html(tiny_gpt, tmp_path / "page.html", "tiny_gpt")
    _open(browser, tmp_path / "page.html")
    plan = tiny_gpt.plan
    (slider,) = browser.find_elements(By.CSS_SELECTOR, "#dims input[type=range]")
    assert [slider.get_attribute(k) for k in ("id", "min", "max", "value")] == [
        "dim-seq", "2", "128", "128"]
    numbers = _summary(browser)
    assert numbers["sizes"] == "seq = 128"
    assert numbers["arena at the upper bounds"] == "655,872 B (640.5 KiB)" == numbers["arena"]
    _set_dim(browser, "seq", 16)
    at16 = plan.at(seq=16)
    numbers = _summary(browser)
    assert browser.find_element(By.ID, "dim-seq-value").text == "16"
    assert numbers["sizes"] == "seq = 16"
    assert _bytes(numbers["arena"].split(" (")[0]) == plan.arena_bytes_at(seq=16) == 28_736
    assert _bytes(numbers["lower bound"].split(" (")[0]) == plan.lower_bound_at(seq=16)
    assert numbers["ratio"] == "1.002 (arena / lower bound)"
    assert numbers["arena at the upper bounds"] == "655,872 B (640.5 KiB)"
    assert numbers["optimal"] == "not proven at these sizes"
    _set_dim(browser, "seq", 32)  # an arena at its lower bound is optimal at any size
    assert plan.arena_bytes_at(seq=32) == plan.lower_bound_at(seq=32)
    assert _summary(browser)["optimal"] == "yes (the arena is the lower bound)"
    _set_dim(browser, "seq", 16)
    top = peak(at16)
    assert numbers["peak step"] == str(top.step)
    live = browser.find_elements(By.CSS_SELECTOR, "#peak tbody tr")
    assert [row.get_attribute("data-id") for row in live] == [str(i) for i in top.storages]
    # the largest storage whose offset and size both grow with seq, hovered and clicked
    moving = [s for s in at16.storages.values()
              if plan.symbolic.sizes[s.id].dims and plan.symbolic.offsets[s.id].dims]
    chosen = max(moving, key=lambda s: (s.size, -s.id))
    assert (chosen.offset, chosen.size) != (plan.storages[chosen.id].offset,
                                            plan.storages[chosen.id].size)
    lines = _hover(browser, chosen.id).splitlines()
    assert lines[1] == (f"offset {chosen.offset:,} B · size {chosen.size:,} B "
                        f"({human_bytes(chosen.size)})")
    ActionChains(browser).click().perform()
    panel = browser.find_element(By.ID, "selected").text.splitlines()
    assert panel[1] == (f"offset {chosen.offset:,} B, size {chosen.size:,} B, "
                        f"steps [{chosen.start}, {chosen.end})")
    sizes = [_bytes(t) for t in _column(browser, 4)]
    assert sizes == sorted((s.size for s in at16.storages.values()), reverse=True)


def test_the_page_evaluates_the_plan_exactly_at_every_seq(browser, tiny_gpt, tmp_path):
    write_html(tiny_gpt, tmp_path / "page.html", "tiny_gpt")
    _open(browser, tmp_path / "page.html")
    drawn = browser.execute_script("""
        const input = document.getElementById("dim-seq");
        const data = window.tensorplanReport.data;
        const found = [];
        for (let seq = 2; seq <= 128; ++seq) {
          input.value = seq;
          input.dispatchEvent(new Event("input"));
          found.push([data.arena, data.lower_bound, data.storages.map((s) => [s.offset, s.size])]);
        }
        return found;""")
    plan = tiny_gpt.plan
    for seq, (arena, lower, storages) in zip(range(2, 129), drawn, strict=True):
        at = plan.at(seq=seq)
        assert (arena, lower) == (at.arena_bytes, at.lower_bound_bytes), seq
        assert storages == [[s.offset, s.size] for _, s in sorted(at.storages.items())], seq


def test_a_static_plan_has_no_dim_slider(browser, tmp_path):
    e = zoo.example("mlp")
    program = tp.compile(e.model, e.args)
    assert program.plan.symbolic is None
    write_html(program, tmp_path / "page.html", "mlp")
    data = _open(browser, tmp_path / "page.html")
    assert browser.find_elements(By.CSS_SELECTOR, "#dims, input[type=range]") == []
    assert "symbolic" not in data and not any("expr" in s for s in data["storages"])
    numbers = _summary(browser)
    assert list(numbers) == [label for label, _ in plan_numbers(program.plan)] + ["peak step"]
    assert numbers["arena"] == bytes_text(program.plan.arena_bytes)


def _terms(browser) -> dict[str, str]:
    """The page's glossary: term -> its line."""
    glossary = browser.find_element(By.ID, "glossary")
    return dict(zip([dt.text for dt in glossary.find_elements(By.TAG_NAME, "dt")],
                    [dd.text for dd in glossary.find_elements(By.TAG_NAME, "dd")], strict=True))


def test_every_figure_has_its_glossary_line_as_tooltip_and_in_the_glossary(browser, tiny_gpt,
                                                                           tmp_path):
    write_html(tiny_gpt, tmp_path / "page.html", "tiny_gpt")
    _open(browser, tmp_path / "page.html")
    boxes = browser.find_elements(By.CSS_SELECTOR, "#summary .number")
    terms = _terms(browser)
    for box in boxes:
        label = box.find_element(By.TAG_NAME, "span").text
        assert box.get_attribute("title") == GLOSSARY[label] == terms[label], label
    for label in ("baseline bound", "regions", "step", "lower bound", "sizes"):
        assert terms[label] == GLOSSARY[label]
    assert "no placement can be smaller" in terms["lower bound"]
    placeholders = sum(n.op == "placeholder" for n in tiny_gpt.exported_program.graph.nodes)
    assert browser.find_element(By.ID, "steps").text.startswith(
        f"Steps 0 to {placeholders - 1} are the program's {placeholders} placeholders")


def _cli_field(out: str, label: str) -> str:
    return re.search(rf"│ {re.escape(label)}\s*│\s*(.*?) │", out).group(1)


def test_the_page_at_seq_16_says_every_size_there_and_the_cli_s_ratios(browser, tiny_gpt,
                                                                       tmp_path, capsys):
    from tensorplan.cli.main import main

    assert main(["plan", "zoo:tiny_gpt", "--at", "seq=16", "--html",
                 str(tmp_path / "page.html")]) == 0
    out = capsys.readouterr().out
    _open(browser, tmp_path / "page.html")
    assert browser.find_element(By.ID, "dim-seq").get_attribute("value") == "16"
    numbers = _summary(browser)
    for label in ("arena", "lower bound", "ratio", "baseline bound", "optimal"):
        assert numbers[label] == _cli_field(out, label), label
    expected = dict(plan_numbers(tiny_gpt.plan, {"seq": 16}))
    assert numbers["ratio"] == expected["ratio"] == "1.002 (arena / lower bound)"
    assert numbers["baseline bound"] == expected["baseline bound"] == (
        "918,016 B (896.5 KiB) at the upper bounds (arena there 0.71x)")
    plan = tiny_gpt.plan
    at16 = plan.at(seq=16)
    single = [s for s in at16.storages.values() if len(s.values) == 1 and not s.graph
              and plan.symbolic.needs[s.id].dims]
    chosen = max(single, key=lambda s: (s.size, -s.id))
    lines = _hover(browser, chosen.id).splitlines()
    assert lines[1] == (f"offset {chosen.offset:,} B · size {chosen.size:,} B "
                        f"({human_bytes(chosen.size)})")
    need = plan.symbolic.needs[chosen.id].evaluate({"seq": 16})
    assert lines[3].endswith(f" · {need:,} B") and "seq=16" in lines[3]
    assert "128" not in lines[3]  # nothing at the upper bounds in a tooltip at seq=16


def test_patched_and_chunked_programs_are_marked_with_split_grid_and_chunks(browser, tmp_path):
    from test_chunks import Stack, _tokens

    e = zoo.example("convnet")
    patched = tp.compile(e.model, e.args, patches=(2, 2))
    write_html(patched, tmp_path / "patched.html", "convnet")
    _open(browser, tmp_path / "patched.html")
    (mark,) = browser.find_elements(By.CSS_SELECTOR, "#marks .mark")
    chosen = patched.patching.chosen
    assert chosen.split and chosen.grid == (2, 2)
    assert mark.text == f"patched patched 2x2 up to {chosen.split}"
    assert mark.get_attribute("title") == f"patched: {GLOSSARY['patched']}"
    assert _terms(browser)["patched"] == GLOSSARY["patched"]
    torch.manual_seed(0)
    chunked = tp.compile(Stack().eval(), (_tokens(),), chunks=4)
    write_html(chunked, tmp_path / "chunked.html", "stack")
    _open(browser, tmp_path / "chunked.html")
    (mark,) = browser.find_elements(By.CSS_SELECTOR, "#marks .mark")
    regions = len(chunked.chunking.regions)
    assert mark.text == f"chunked chunked: {regions} regions in 4 chunks of rows"
    assert _terms(browser)["chunked"] == GLOSSARY["chunked"]
    (key,) = browser.find_elements(By.CSS_SELECTOR, "#legend .key[data-label=chunked]")
    assert key.text == f"chunked: where its {regions} regions run (the strip along the top)"


def test_a_dsa_page_has_the_instance_s_figures_alone_and_the_file_s_name(browser, tmp_path):
    from tensorplan.cli.main import main

    path = tmp_path / "deep" / "folder" / "stairs.csv"
    path.parent.mkdir(parents=True)
    _dsa_instance(path, 40)
    assert main(["dsa", str(path.resolve()), "--algorithm", "greedy", "--html",
                 str(tmp_path / "dsa.html")]) == 0
    data = _open(browser, tmp_path / "dsa.html")
    assert browser.title == "stairs.csv: placement"
    assert browser.find_element(By.TAG_NAME, "h1").text == "stairs.csv: placement"
    numbers = _summary(browser)
    assert list(numbers) == ["buffers", "algorithm", "peak", "lower bound", "gap", "optimal",
                             "peak step"]
    assert numbers["buffers"] == "40"
    assert int(numbers["peak"].removesuffix(" B").replace(",", "")) == data["arena"]
    head = [th.get_attribute("data-key")
            for th in browser.find_elements(By.CSS_SELECTOR, "#storage-head th")]
    assert head == ["id", "values", "offset", "size", "start", "end", "lifetime"]
    legend = browser.find_element(By.ID, "legend").text
    assert "buffer (a row of the instance)" in legend and "activation" not in legend
    page = browser.find_element(By.TAG_NAME, "body").text
    for field in ("baseline bound", "constants", "order", "alignment", "regions", "storages"):
        assert field not in numbers and field not in _terms(browser), field
    assert str(tmp_path) not in page
    assert set(_terms(browser)) == {*numbers, "step"}


class _ViewsFirst(torch.nn.Module):
    """Three views of a weight run before the first value of the arena is made."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(3, 4))
        self.b = torch.nn.Parameter(torch.randn(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w.t().t().t() + self.b


def test_the_steps_between_placeholders_and_the_chart_are_explained(browser, tmp_path):
    prog = tp.compile(_ViewsFirst(), (torch.randn(2, 4),), fold=False, reorder=False)
    write_html(prog, tmp_path / "page.html", "views")
    _open(browser, tmp_path / "page.html")
    assert browser.find_element(By.ID, "steps").text == (
        "Steps 0 to 2 are the program's 3 placeholders (inputs, weights, buffers): nothing runs "
        "there; steps 3 to 4 make no value of the arena (views, values of the weights), so the "
        "chart starts at step 5.")
