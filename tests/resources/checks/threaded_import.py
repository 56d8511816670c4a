"""A module that starts a thread when imported: a check server that preloads it must refuse to fork."""
import threading
import time

threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
