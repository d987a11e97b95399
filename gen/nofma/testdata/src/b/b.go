// Package b exports functions that add their parameters, for a's facts.
package b

// Round adds its parameter: a product passed to it fuses when inlined.
func Round(f float32) int32 { return int32(f + 12582912) }

// Scale multiplies only.
func Scale(f float32) float32 { return f * 2 }
