"""Tools that exercise the program offline: render, effective objects, admission, the local scheduler."""
