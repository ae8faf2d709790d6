scan { interval = "fast" }
