-- A seeded generator for oopsctl chaos: splitmix64 on Lua's 64-bit
-- integers, so one seed gives one sequence on every machine and Lua build
-- (math.random's generator and seeding are not promised to stay the same).
--
--   local r = require("oops.chaos.rng").new(42)
--   r:int(1, 6)     an integer in [1, 6]
--   r:float()       a number in [0, 1)
--   r:pick(list)    one element
--   r:chance(0.25)  true a quarter of the time
--   r:fork(tag)     an independent generator derived from this seed and tag
local M = {}

local R = {}
R.__index = R

local function mix(z)
  z = (z ~ (z >> 30)) * -4658895280553007687 -- 0xbf58476d1ce4e5b9
  z = (z ~ (z >> 27)) * -7723592293110705685 -- 0x94d049bb133111eb
  return z ~ (z >> 31)
end

function M.new(seed)
  assert(math.type(seed) == "integer", "rng.new: an integer seed")
  return setmetatable({ state = seed, seed = seed }, R)
end

-- The next 64 bits.
function R:next()
  self.state = self.state + -7046029254386353131 -- 0x9e3779b97f4a7c15
  return mix(self.state)
end

-- [0, 1) from the top 53 bits.
function R:float() return ((self:next() >> 11) & ((1 << 53) - 1)) / (1 << 53) end

function R:int(lo, hi)
  assert(hi >= lo, "rng:int: empty range")
  return lo + math.floor(self:float() * (hi - lo + 1))
end

function R:range(lo, hi) return lo + self:float() * (hi - lo) end
function R:pick(list) return list[self:int(1, #list)] end
function R:chance(p) return self:float() < p end

-- Weighted choice: weights = { {name, weight}, ... } → name.
function R:weighted(weights)
  local total = 0
  for _, w in ipairs(weights) do total = total + w[2] end
  local x = self:float() * total
  for _, w in ipairs(weights) do
    x = x - w[2]
    if x < 0 then return w[1] end
  end
  return weights[#weights][1]
end

function R:fork(tag)
  local h = self.seed
  for i = 1, #tag do h = mix(h ~ tag:byte(i)) end
  return M.new(h)
end

return M
