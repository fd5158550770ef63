"""Screenshot of the live-caption page with the default model (docs/live-page.png): starts `simulmt serve`, plays
the page's sample talk in headless Chromium, waits for the translation, saves the picture.

    .venv/bin/python scripts/page_screenshot.py [--out docs/live-page.png] [--seconds 90]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=str(ROOT / "docs" / "live-page.png"))
    parser.add_argument("--seconds", type=float, default=90.0, help="how long the talk may take")
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "simulmt.cli", "serve", "--port", str(port)], cwd=ROOT,
                              env={**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2")})
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except OSError:
                time.sleep(1)
        options = webdriver.ChromeOptions()
        options.binary_location = "/usr/bin/chromium"
        for flag in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1100,760"):
            options.add_argument(flag)
        driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
        try:
            driver.get(f"http://127.0.0.1:{port}/")
            driver.find_element(By.ID, "play").click()
            deadline = time.time() + args.seconds
            while time.time() < deadline and "closed" not in driver.find_element(By.ID, "status").text:
                time.sleep(1)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            driver.save_screenshot(args.out)
            print(driver.find_element(By.ID, "target").text)
        finally:
            driver.quit()
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
