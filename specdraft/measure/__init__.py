"""Measurements of specdraft itself: `specdraft bench` (against the reference) and `specdraft scaling`."""
