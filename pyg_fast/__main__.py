import pyg_fast

pyg_fast.show_config()
