"""The web page in a real browser: Debian's chromium, headless, driven by Selenium through
chromium-driver, types a sentence, presses Translate and reads the translation, which must be
the offline translator's."""

import dataclasses
import os
import shutil

import pytest

pytest.importorskip("fastapi")
webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                reason="needs chromium and chromium-driver (apt)")

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from serving_helpers import running_server  # noqa: E402
from test_serving import translator  # noqa: E402, F401  (a fixture)
from transformer_mt.storage.model_dir import save_model  # noqa: E402


def browser(user_data_dir):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu",
                "--disable-background-networking", "--no-first-run",
                "--disable-dev-shm-usage", f"--user-data-dir={user_data_dir}",
                "--window-size=1000,700"):
        options.add_argument(arg)
    return webdriver.Chrome(options=options, service=webdriver.ChromeService(DRIVER))


def test_type_translate_and_read_the_translation(translator, tmp_path):  # noqa: F811
    save_model(translator.model, tmp_path / "model", vocab_path=translator.vocab.path,
               decode=translator.decode_cfg)
    sentence = "small girl sees a big ball !"
    with running_server(tmp_path / "model") as (base, _server):
        driver = browser(tmp_path / "chromium")
        try:
            driver.get(base + "/")
            driver.find_element(By.ID, "source").send_keys(sentence)
            driver.find_element(By.ID, "translate").click()
            WebDriverWait(driver, 30).until(
                expected_conditions.text_to_be_present_in_element((By.ID, "status"), " ms"))
            beam4 = dataclasses.replace(translator.decode_cfg, beam_size=4)  # the page's
            expected = translator.translate_ids([translator.encode_source(sentence, 0)], beam4)
            assert driver.find_element(By.ID, "output").text == expected[0][0].text
            assert "line(s) in" in driver.find_element(By.ID, "status").text
            assert "parameters" in driver.find_element(By.ID, "model").text  # /v1/models
            path = os.environ.get("TRANSFORMER_MT_SCREENSHOT", str(tmp_path / "page.png"))
            assert driver.save_screenshot(path)
        finally:
            driver.quit()


def test_show_attention_draws_each_translations_cross_attention(translator, tmp_path):  # noqa: F811
    from transformer_mt.inference.alignment import AlignmentChoice, hard_alignment

    save_model(translator.model, tmp_path / "model", vocab_path=translator.vocab.path,
               decode=translator.decode_cfg)
    lines = ["small girl sees a big ball !", "", "dog runs ."]
    beam4 = dataclasses.replace(translator.decode_cfg, beam_size=4)  # the page's
    sources = [translator.encode_source(s, i) for i, s in enumerate(lines) if s]
    best = [n[0] for n in translator.translate_ids(sources, beam4)]
    expected = translator.alignments(sources, best, AlignmentChoice())
    with running_server(tmp_path / "model") as (base, _server):
        driver = browser(tmp_path / "chromium")
        try:
            driver.get(base + "/")
            assert not driver.find_element(By.ID, "attention").is_displayed()
            driver.find_element(By.ID, "source").send_keys("\n".join(lines))
            driver.find_element(By.ID, "show-attention").click()
            driver.find_element(By.ID, "translate").click()
            WebDriverWait(driver, 30).until(
                expected_conditions.text_to_be_present_in_element((By.ID, "status"), " ms"))
            figures = driver.find_elements(By.CSS_SELECTOR, "#attention figure")
            assert [f.find_element(By.TAG_NAME, "figcaption").text for f in figures] == [
                f"line {n}: encoder-decoder attention, decoder layer 1 of 2 (index 0), heads "
                "averaged" for n in (1, 3)], "the empty line has no map"
            for figure, rows, hyp in zip(figures, expected, best, strict=True):
                rects = figure.find_elements(By.TAG_NAME, "rect")
                assert len(rects) == rows.numel() == len(hyp.tokens) * rows.shape[1]
                drawn = [float(r.get_attribute("data-w")) for r in rects]
                assert max(abs(a - b) for a, b in zip(drawn, rows.flatten().tolist(),
                                                       strict=True)) < 1e-4
                outlined = [k for k, r in enumerate(rects) if r.get_attribute("class") == "link"]
                S = rows.shape[1]
                assert outlined == sorted(j * S + i for i, j in hard_alignment(rows))
        finally:
            driver.quit()


def test_the_page_takes_an_api_key_and_explains_401_413_and_429(translator, tmp_path):  # noqa: F811
    save_model(translator.model, tmp_path / "model", vocab_path=translator.vocab.path,
               decode=translator.decode_cfg)
    # a queue of 1 sentence: 2 lines are refused at once with 429; 3 lines are over the
    # request's limit of 2 sentences (413)
    with running_server(tmp_path / "model", "--api-key", "s3cret", "--max-queue", "1",
                        "--max-sentences", "2") as (base, _server):
        driver = browser(tmp_path / "chromium")

        def translate(text: str) -> str:
            source = driver.find_element(By.ID, "source")
            source.clear()
            source.send_keys(text)
            driver.find_element(By.ID, "translate").click()
            WebDriverWait(driver, 30).until(lambda d: d.find_element(
                By.ID, "translate").is_enabled() and d.find_element(By.ID, "output").text)
            return driver.find_element(By.ID, "output").text

        try:
            driver.get(base + "/")
            WebDriverWait(driver, 30).until(expected_conditions.text_to_be_present_in_element(
                (By.ID, "model"), "needs an API key"))
            assert translate("dog runs .").startswith("This server needs an API key")
            assert "error" in driver.find_element(By.ID, "output").get_attribute("class")
            driver.find_element(By.ID, "api-key").send_keys("s3cret")
            beam4 = dataclasses.replace(translator.decode_cfg, beam_size=4)  # the page's
            expected = translator.translate_ids([translator.encode_source("dog runs .", 0)],
                                                beam4)[0][0].text
            assert translate("dog runs .") == expected
            assert "error" not in driver.find_element(By.ID, "output").get_attribute("class")
            assert "parameters" in driver.find_element(By.ID, "model").text  # the key opened it
            assert translate("dog\ncat\nbird").startswith("Too much at once: send less text.")
            assert "limit 2" in driver.find_element(By.ID, "output").text
            assert translate("dog\ncat").startswith("The server is busy: try again in 1 s.")
        finally:
            driver.quit()
