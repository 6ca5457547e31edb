"""Models in and out of other toolkits' formats."""
