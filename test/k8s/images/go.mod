module agentic-test-images

go 1.21
