// duration: durations as Go flags read them (time.ParseDuration) and as Go prints them (Duration.String).
package main

import (
	"encoding/json"
	"strconv"
	"time"
)

// Nanoseconds as decimal text: JSON numbers would lose precision above 2^53.
type durationAnswer struct {
	Error  string `json:"error,omitempty"`
	Ns     string `json:"ns,omitempty"`
	String string `json:"string,omitempty"`
}

func init() {
	register("duration", func(raw json.RawMessage) any {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return map[string]string{"inputError": err.Error()}
		}
		d, err := time.ParseDuration(text)
		if err != nil {
			return durationAnswer{Error: err.Error()}
		}
		return durationAnswer{Ns: strconv.FormatInt(int64(d), 10), String: d.String()}
	})

	// How Go prints a whole number of nanoseconds (given as decimal text).
	register("duration-string", func(raw json.RawMessage) any {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return map[string]string{"inputError": err.Error()}
		}
		ns, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return durationAnswer{Error: err.Error()}
		}
		return durationAnswer{Ns: text, String: time.Duration(ns).String()}
	})
}
