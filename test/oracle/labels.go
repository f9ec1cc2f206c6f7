// labels: label selectors as kube-apiserver and client-go read them (k8s.io/apimachinery/pkg/labels).
package main

import (
	"encoding/json"

	"k8s.io/apimachinery/pkg/labels"
)

type labelsInput struct {
	Selector string              `json:"selector"`
	Labels   []map[string]string `json:"labels"`
}

type labelsRequirement struct {
	Key      string   `json:"key"`
	Operator string   `json:"operator"`
	Values   []string `json:"values"`
}

// What labels.Parse makes of the selector: its error, or its requirements (sorted by key, values deduplicated
// and sorted, as the parser keeps them), its String() and whether it matches each label set.
type labelsAnswer struct {
	Error        string              `json:"error,omitempty"`
	Requirements []labelsRequirement `json:"requirements,omitempty"`
	String       string              `json:"string"`
	Matches      []bool              `json:"matches,omitempty"`
}

func init() {
	register("labels", func(raw json.RawMessage) any {
		var input labelsInput
		if err := json.Unmarshal(raw, &input); err != nil {
			return map[string]string{"inputError": err.Error()}
		}
		selector, err := labels.Parse(input.Selector)
		if err != nil {
			return labelsAnswer{Error: err.Error()}
		}
		answer := labelsAnswer{String: selector.String(), Requirements: []labelsRequirement{}}
		requirements, _ := selector.Requirements()
		for _, requirement := range requirements {
			answer.Requirements = append(answer.Requirements, labelsRequirement{
				Key:      requirement.Key(),
				Operator: string(requirement.Operator()),
				Values:   requirement.Values().List(),
			})
		}
		for _, set := range input.Labels {
			answer.Matches = append(answer.Matches, selector.Matches(labels.Set(set)))
		}
		return answer
	})
}
