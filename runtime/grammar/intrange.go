package grammar

import (
	"math/big"
	"strconv"
	"strings"
)

// maxIntDigits is the most digits the integer rule emits (see integer).
const maxIntDigits = 16

var intCap = big.NewInt(9_999_999_999_999_999) // the largest integer of maxIntDigits digits

// boundedInteger compiles type integer with minimum / maximum /
// exclusiveMinimum / exclusiveMaximum exactly: a digit automaton whose
// strings are the integers in [lo, hi] (no leading zeros, no "-0"). Open
// sides stop at the integer rule's digit cap. ok is false when s has no
// numeric bound (the plain integer rule applies).
func (c *compiler) boundedInteger(s *jv, path string) (sq seq, ok bool, err error) {
	lo, hi := new(big.Int).Neg(intCap), new(big.Int).Set(intCap)
	for _, k := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		v := s.get(k)
		if v == nil {
			continue
		}
		ok = true
		if v.kind != 'n' {
			return nil, false, c.fail(path+"/"+k, "%s must be a number", k)
		}
		r, good := new(big.Rat).SetString(v.str)
		if !good {
			return nil, false, c.fail(path+"/"+k, "%s %s is not a usable number", k, v.str)
		}
		var b *big.Int
		switch k {
		case "minimum": // the least integer >= r
			b = ratCeil(r)
		case "exclusiveMinimum": // the least integer > r
			b = ratFloor(r)
			b.Add(b, big.NewInt(1))
		case "maximum":
			b = ratFloor(r)
		case "exclusiveMaximum":
			b = ratCeil(r)
			b.Sub(b, big.NewInt(1))
		}
		if k == "minimum" || k == "exclusiveMinimum" {
			if b.Cmp(lo) > 0 {
				lo = b
			}
		} else if b.Cmp(hi) < 0 {
			hi = b
		}
	}
	if !ok {
		return nil, false, nil
	}
	if lo.Cmp(hi) > 0 {
		return nil, false, c.fail(path, "no integer satisfies the bounds (within %d digits)", maxIntDigits)
	}
	return c.intRange(lo.Int64(), hi.Int64()), true, nil
}

func ratFloor(r *big.Rat) *big.Int {
	q, _ := new(big.Int).DivMod(r.Num(), r.Denom(), new(big.Int)) // Euclidean (denominator > 0): the floor
	return q
}

func ratCeil(r *big.Rat) *big.Int {
	q := ratFloor(r)
	if !r.IsInt() {
		q.Add(q, big.NewInt(1))
	}
	return q
}

// intRange is the decimal integers in [lo, hi], lo <= hi, |lo|,|hi| within the cap.
func (c *compiler) intRange(lo, hi int64) seq {
	var alts []seq
	if lo < 0 {
		nhi := min(hi, -1)
		alts = append(alts, cat(c.b.lit("-"), c.natRange(-nhi, -lo)))
	}
	if hi >= 0 {
		alts = append(alts, c.natRange(max(lo, 0), hi))
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return seq{c.b.rule(alts...)}
}

// natRange is the decimal naturals in [lo, hi], 0 <= lo <= hi: split by
// digit count, then each same-length range by its leading digit.
func (c *compiler) natRange(lo, hi int64) seq {
	var alts []seq
	p := int64(1) // 10^(L-1)
	for l := 1; l <= maxIntDigits; l++ {
		first, last := max(lo, p), min(hi, p*10-1)
		if l == 1 {
			first = lo
		}
		if first <= last {
			alts = append(alts, c.digitRange(strconv.FormatInt(first, 10), strconv.FormatInt(last, 10)))
		}
		if hi < p*10 {
			break
		}
		p *= 10
	}
	if len(alts) == 1 {
		return alts[0]
	}
	return seq{c.b.rule(alts...)}
}

// digitRange is the digit strings of len(lo) between lo and hi (lo <= hi,
// same length), in O(len^2) elements.
func (c *compiler) digitRange(lo, hi string) seq {
	b := c.b
	if lo == "" {
		return seq{}
	}
	if lo[0] == hi[0] {
		return cat(seq{b.chars(lo[0], lo[0])}, c.digitRange(lo[1:], hi[1:]))
	}
	n := len(lo) - 1
	zeros, nines := strings.Repeat("0", n), strings.Repeat("9", n)
	d := seq{b.chars('0', '9')}
	if lo[1:] == zeros && hi[1:] == nines {
		return cat(seq{b.chars(lo[0], hi[0])}, b.repeat(d, n, n))
	}
	var alts []seq
	alts = append(alts, cat(seq{b.chars(lo[0], lo[0])}, c.digitRange(lo[1:], nines)))
	if lo[0]+1 <= hi[0]-1 {
		alts = append(alts, cat(seq{b.chars(lo[0]+1, hi[0]-1)}, b.repeat(d, n, n)))
	}
	alts = append(alts, cat(seq{b.chars(hi[0], hi[0])}, c.digitRange(zeros, hi[1:])))
	return seq{b.rule(alts...)}
}

func hasNumericBound(s *jv) bool {
	return s.get("minimum") != nil || s.get("maximum") != nil || s.get("exclusiveMinimum") != nil || s.get("exclusiveMaximum") != nil
}
