-- oops.quantity: resource quantities with explicit units (REFERENCE.md §8).
local quantity = require("oops.quantity")

local function refuses(fn, value, want)
  local n, err = fn(value)
  assert.is_nil(n)
  assert.are.equal(want, err)
end

describe("quantity.cpu", function()
  local good = {
    ["500m"] = 500, ["2"] = 2000, ["0.5"] = 500, ["1.5"] = 1500, ["0.1"] = 100, ["0.001"] = 1,
    ["1m"] = 1, ["0"] = 0, ["2.000"] = 2000, ["0.2500"] = 250, ["1000m"] = 1000, ["16"] = 16000,
  }
  for text, mc in pairs(good) do
    it(("reads %q as %d millicores"):format(text, mc), function()
      assert.are.equal(mc, quantity.cpu(text))
      assert.are.equal("integer", math.type(quantity.cpu(text)))
    end)
  end

  it("refuses a Lua number: the unit must be written", function()
    refuses(quantity.cpu, 2, '2: must be a string (e.g. "500m", "2", "0.5"), not a number')
    refuses(quantity.cpu, 0.5, '0.5: must be a string (e.g. "500m", "2", "0.5"), not a number')
  end)

  it("refuses what is not a CPU quantity", function()
    for _, text in ipairs({ "two", "", "2 cores", "500M", "2.", ".5", "-1", "1e3", "500mm", "0.5m5" }) do
      refuses(quantity.cpu, text, string.format("%q", text) .. ": not a CPU quantity (e.g. 500m, 2, 0.5)")
    end
  end)

  it("refuses fractions of a millicore", function()
    refuses(quantity.cpu, "0.0005", '"0.0005": finer than a millicore (1m)')
    refuses(quantity.cpu, "1.5m", '"1.5m": finer than a millicore (1m)')
    refuses(quantity.cpu, "0.0000001", '"0.0000001": finer than a millicore (1m)')
  end)
end)

describe("quantity.memory", function()
  local good = {
    ["512Mi"] = 536870912, ["4Gi"] = 4294967296, ["1G"] = 1000000000, ["1000M"] = 1000000000,
    ["123Ki"] = 125952, ["1k"] = 1000, ["1Ti"] = 1099511627776, ["2T"] = 2000000000000,
    ["1.5Gi"] = 1610612736, ["0.5Ki"] = 512, ["0Mi"] = 0, ["2.50Gi"] = 2684354560,
  }
  for text, bytes in pairs(good) do
    it(("reads %q as %d bytes"):format(text, bytes), function()
      assert.are.equal(bytes, quantity.memory(text))
      assert.are.equal("integer", math.type(quantity.memory(text)))
    end)
  end

  it("refuses a bare number, written or Lua, with the accepted forms", function()
    refuses(quantity.memory, 512, "512: needs a unit (e.g. 512Mi, 4Gi, 1G)")
    refuses(quantity.memory, "512", '"512": needs a unit (e.g. 512Mi, 4Gi, 1G)')
    refuses(quantity.memory, nil, "nil: needs a unit (e.g. 512Mi, 4Gi, 1G)")
  end)

  it('refuses "m", which Kubernetes reads as thousandths of a byte', function()
    refuses(quantity.memory, "512m", '"512m": unit "m" means thousandths; did you mean Mi or M?')
  end)

  it("refuses unknown units", function()
    refuses(quantity.memory, "4GB", '"4GB": unknown unit "GB" (use Ki, Mi, Gi, Ti or k, M, G, T)')
    refuses(quantity.memory, "4gi", '"4gi": unknown unit "gi" (use Ki, Mi, Gi, Ti or k, M, G, T)')
    refuses(quantity.memory, "1K", '"1K": unknown unit "K" (use Ki, Mi, Gi, Ti or k, M, G, T)')
  end)

  it("refuses what is not a quantity", function()
    for _, text in ipairs({ "", "Gi", "four Gi", "-1Gi", "1 Gi", "1.Gi", "1e3M" }) do
      refuses(quantity.memory, text, string.format("%q", text) .. ": not a memory quantity (e.g. 512Mi, 4Gi, 1G)")
    end
  end)

  it("refuses fractions of a byte and absurd sizes", function()
    refuses(quantity.memory, "0.3Ki", '"0.3Ki": not a whole number of bytes')
    refuses(quantity.memory, "1.0000001G", '"1.0000001G": too many decimal places')
    refuses(quantity.memory, "9999999Ti", '"9999999Ti": too large')
    refuses(quantity.memory, "9999999999999999Ki", '"9999999999999999Ki": not a memory quantity (e.g. 512Mi, 4Gi, 1G)')
  end)
end)
