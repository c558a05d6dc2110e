"""What explains a run: its predicted speed, measured costs, the exactness lab, and how outcomes look."""
