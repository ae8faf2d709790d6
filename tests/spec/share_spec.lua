-- Which free pipelines a server takes (lua/oops/share.lua, issue 36): its own
-- on the ring of live servers first, no two servers asking for the same one,
-- others' once they waited a tick, every one after a takeover.
local share = require("oops.share")

local function ids(n, prefix)
  local v = {}
  for i = 1, n do v[i] = (prefix or "p") .. string.format("%011d", i) end
  return v
end

-- What every one of `live` servers picks from the same free list.
local function fleet(free, live, max_new, waited)
  local picks = {}
  for rank = 0, live - 1 do
    picks[rank] = share.pick { free = free, live = live, rank = rank, max_new = max_new,
                               waited = waited and waited[rank] }
  end
  return picks
end

describe("share.slot", function()
  it("is the same for the same id on every server, and within the ring", function()
    for _, id in ipairs(ids(200)) do
      local s = share.slot(id, 7)
      assert.equals(s, share.slot(id, 7))
      assert.is_true(s >= 0 and s < 7)
    end
  end)

  it("spreads ids evenly over the ring", function()
    local count = {}
    for i = 0, 49 do count[i] = 0 end
    for _, id in ipairs(ids(10000)) do
      local s = share.slot(id, 50)
      count[s] = count[s] + 1
    end
    local max, min = 0, math.huge
    for i = 0, 49 do max, min = math.max(max, count[i]), math.min(min, count[i]) end
    -- 200 expected each: no slot far from it.
    assert.is_true(max <= 260 and min >= 140, ("slots from %d to %d"):format(min, max))
  end)
end)

describe("share.pick", function()
  it("gives one server everything, oldest first, up to max_new", function()
    local free = ids(30)
    local picked = share.pick { free = free, live = 1, rank = 0, max_new = 10 }
    assert.same({ table.unpack(free, 1, 10) }, picked)
  end)

  it("never gives two live servers the same pipeline on a first look", function()
    for _, live in ipairs({ 2, 3, 50, 200 }) do
      local free = ids(2000)
      local seen, total = {}, 0
      for _, picked in pairs(fleet(free, live, 2000)) do
        for _, id in ipairs(picked) do
          assert.is_nil(seen[id], id .. " picked twice with " .. live .. " servers")
          seen[id], total = true, total + 1
        end
      end
      -- And most of the work is taken at once (what a hash's unevenness leaves
      -- over the fair share waits for the next tick).
      assert.is_true(total >= 0.8 * #free, ("%d of %d taken by %d servers"):format(total, #free, live))
    end
  end)

  it("takes at most the fair share and max_new", function()
    local free = ids(1000)
    for rank = 0, 3 do
      local picked = share.pick { free = free, live = 4, rank = rank, max_new = 100 }
      assert.is_true(#picked <= 100)
    end
    local picked = share.pick { free = ids(40), live = 4, rank = 1, max_new = 100 }
    assert.is_true(#picked <= 10)
  end)

  it("leaves others' pipelines to them until they waited a tick, then takes them", function()
    local free = ids(100)
    -- Server 0 of two; server 1 never comes (gone, not yet counted out).
    local first, left = share.pick { free = free, live = 2, rank = 0, max_new = 500 }
    for _, id in ipairs(first) do assert.equals(0, share.slot(id, 2)) end
    local theirs = 0
    for _, id in ipairs(free) do
      if share.slot(id, 2) == 1 then
        theirs = theirs + 1
        assert.is_true(left[id], id .. " remembered as left to others")
      end
    end
    assert.is_true(theirs > 0)
    -- The next tick: what is still free is server 1's, and it waited.
    local rest = {}
    for _, id in ipairs(free) do if share.slot(id, 2) == 1 then rest[#rest + 1] = id end end
    local second = share.pick { free = rest, live = 2, rank = 0, max_new = 500, waited = left }
    assert.equals(math.ceil(#rest / 2), #second)
    for _, id in ipairs(second) do assert.equals(1, share.slot(id, 2)) end
  end)

  it("takes a pipeline it had not seen before only when it is its own", function()
    local free = ids(50)
    local picked = share.pick { free = free, live = 3, rank = 2, max_new = 500, waited = {} }
    for _, id in ipairs(picked) do assert.equals(2, share.slot(id, 3)) end
  end)

  it("takes a gone driver's pipeline at once, whatever its slot", function()
    local free, statuses = ids(60), {}
    for i = 1, #free do statuses[i] = i % 2 == 0 and "RUNNING" or "INITIALIZED" end
    local picked = share.pick { free = free, statuses = statuses, live = 3, rank = 0, max_new = 500 }
    local got = {}
    for _, id in ipairs(picked) do got[id] = true end
    for i, id in ipairs(free) do
      if statuses[i] == "INITIALIZED" and share.slot(id, 3) ~= 0 then
        assert.is_nil(got[id], id .. ": another's new pipeline, not waited")
      end
    end
    local orphans = 0
    for i, id in ipairs(free) do
      if statuses[i] == "RUNNING" and share.slot(id, 3) ~= 0 and got[id] then orphans = orphans + 1 end
    end
    assert.is_true(orphans > 0, "gone drivers' pipelines of other slots are taken")
  end)

  it("takes every free one, up to max_new, right after a takeover", function()
    local free = ids(80)
    local picked = share.pick { free = free, live = 5, rank = 3, max_new = 60, all = true }
    assert.same({ table.unpack(free, 1, 60) }, picked)
  end)

  it("puts a server not yet counted live on the ring beside the others", function()
    -- Rank 3 of a count of 3 (its own name lock not seen): a ring of 4.
    local picked = share.pick { free = ids(400), live = 3, rank = 3, max_new = 500 }
    assert.is_true(#picked > 0)
    for _, id in ipairs(picked) do assert.equals(3, share.slot(id, 4)) end
  end)
end)
