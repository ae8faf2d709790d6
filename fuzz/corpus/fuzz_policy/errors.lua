scan { interval = "50ms", extra = 1 }
scan { interval = "1s" }
application "Shop/API" { environments = { "prod" } }
application "shop/api" { environments = { "prod", "prod" }, restart = { dev = "61 * * * *" } }
application "shop/web"
gateway "kubernetes" {}
gateway "nope" { build = 5 }
deploy { timeout = 5 }
notify {}
alert { cpu = { percent = 101 }, probe = { prometheus = "ftp://x" } }
limits = 3
build = nil
print("hi")
