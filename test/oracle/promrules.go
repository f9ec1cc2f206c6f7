// promrules: Prometheus rule files as `promtool check rules` reads them (rulefmt.Parse: the YAML, each rule's
// fields and PromQL, its templates), and PromQL expressions as Prometheus parses them, each with the metric names
// its selectors name, so a test can hold every name to the metrics our programs register.
package main

import (
	"encoding/json"
	"io"
	"log/slog"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

type promqlAnswer struct {
	Error string `json:"error,omitempty"`
	// The metric name of each selector, "" for a selector that names none (a regular expression on __name__).
	Metrics []string `json:"metrics"`
}

type ruleAnswer struct {
	Name string `json:"name"`
	promqlAnswer
}

type rulesAnswer struct {
	Errors []string     `json:"errors"`
	Rules  []ruleAnswer `json:"rules"`
}

var promql = parser.NewParser(parser.Options{})

func metricNames(expr string) promqlAnswer {
	parsed, err := promql.ParseExpr(expr)
	if err != nil {
		return promqlAnswer{Error: err.Error(), Metrics: []string{}}
	}
	names := []string{}
	parser.Inspect(parsed, func(node parser.Node, _ []parser.Node) error {
		if selector, ok := node.(*parser.VectorSelector); ok {
			name := selector.Name
			for _, matcher := range selector.LabelMatchers {
				if matcher.Name == labels.MetricName && matcher.Type == labels.MatchEqual {
					name = matcher.Value
				}
			}
			names = append(names, name)
		}
		return nil
	})
	return promqlAnswer{Metrics: names}
}

func init() {
	register("promql", func(raw json.RawMessage) any {
		var expr string
		if err := json.Unmarshal(raw, &expr); err != nil {
			return map[string]string{"inputError": err.Error()}
		}
		return metricNames(expr)
	})

	// A rule file's text (the `groups:` of a PrometheusRule's spec).
	register("prometheus-rules", func(raw json.RawMessage) any {
		var text string
		if err := json.Unmarshal(raw, &text); err != nil {
			return map[string]string{"inputError": err.Error()}
		}
		logger := slog.New(slog.NewTextHandler(io.Discard, nil))
		groups, errs := rulefmt.Parse([]byte(text), false, model.UTF8Validation, promql, logger)
		answer := rulesAnswer{Errors: []string{}, Rules: []ruleAnswer{}}
		for _, err := range errs {
			answer.Errors = append(answer.Errors, err.Error())
		}
		if groups == nil {
			return answer
		}
		for _, group := range groups.Groups {
			for _, rule := range group.Rules {
				name := rule.Alert
				if name == "" {
					name = rule.Record
				}
				answer.Rules = append(answer.Rules, ruleAnswer{Name: name, promqlAnswer: metricNames(rule.Expr)})
			}
		}
		return answer
	})
}
