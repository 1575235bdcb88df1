"""The kubeacc.io/v1alpha1 custom resources: API types, CRD manifests, lightkube resources."""
