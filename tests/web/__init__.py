"""The web cabinet end to end: the pages served at `/`, driven in a real headless Chromium by Playwright."""
