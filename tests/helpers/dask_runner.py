"""What the unit and the integration tests of dask_runner share."""

from __future__ import annotations

import apache_beam as beam


class Tagged(beam.DoFn):
    """Main and tagged outputs, and an output from finish_bundle (which the stock runner lost)."""

    def start_bundle(self):
        self.seen = 0

    def process(self, x):
        self.seen += 1
        yield x
        yield beam.pvalue.TaggedOutput("squares", x * x)

    def finish_bundle(self):
        from apache_beam.transforms.window import GlobalWindows

        yield beam.pvalue.TaggedOutput("bundles", GlobalWindows.windowed_value(self.seen))
