application "a/b" { environments = { "prod" }
((((((((((((((((((((((((((((((((((((((((
