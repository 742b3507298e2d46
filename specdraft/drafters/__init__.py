"""Stage 5: the source families and every source's draft at every query position; `specdraft lookup`."""
