module github.com/vmlane/vmlane

go 1.25.0
