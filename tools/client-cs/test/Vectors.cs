// The shared protocol vectors (docs/client-protocol-vectors.json), checked against this client's
// frame reader and writer, as the Rust gateway's and the TypeScript client's tests check them.

using System;
using System.IO;
using System.Text;

namespace Ferry.Client.Tests
{
    static class Vectors
    {
        public static JsonValue Load(string path)
        {
            return Json.Parse(File.ReadAllText(path, Encoding.UTF8));
        }

        public static void CloseCodesMatch(JsonValue vectors)
        {
            var table = vectors.Member("close_codes").Items;
            Check.Equal(Enum.GetValues(typeof(CloseCode)).Length, table.Count, "close codes");
            foreach (JsonValue row in table)
            {
                string name = row.Member("code").String;
                long n;
                row.Member("n").TryGetCount(out n);
                var code = (CloseCode)n;
                Check.Equal(name, CloseCodes.Name(code), "the name of code " + n);
                CloseCode parsed;
                Check.True(CloseCodes.TryParse(name, out parsed) && parsed == code, name + " reads as code " + n);
                Check.Equal(row.Member("retryable").Bool, CloseCodes.IsRetryable(code), name + " retryable");
            }
        }

        public static void CloseStatusesMatch(JsonValue vectors)
        {
            foreach (JsonValue row in vectors.Member("close_statuses").Items)
            {
                long status;
                row.Member("status").TryGetCount(out status);
                CloseCode? code = CloseCodes.FromStatus((int)status);
                JsonValue expected = row.Member("code");
                string what = "close status " + status;
                Check.Equal(expected.Kind == JsonKind.Null ? "null" : expected.String,
                    code == null ? "null" : CloseCodes.Name(code.Value), what);
                Check.Equal(row.Member("retryable").Bool, Protocol.RetryableClose(code), what + " retryable");
            }
        }

        public static void ClientFramesMatch(JsonValue vectors)
        {
            foreach (JsonValue row in vectors.Member("client_frames").Items)
            {
                string call = row.Member("call").String;
                JsonValue actor = row.Member("actor");
                string written;
                switch (call)
                {
                    case "hello": written = Protocol.Hello(row.Member("token").String); break;
                    case "bind": written = Protocol.Bind(actor.String); break;
                    case "unbind": written = Protocol.Unbind(actor.String); break;
                    case "input": written = Protocol.Input(actor.String, row.Member("message").Raw); break;
                    case "bye": written = Protocol.Bye; break;
                    default: throw new Exception("a vector calls " + call + ", which this test does not know");
                }
                Check.True(Json.Same(row.Member("frame"), Json.Parse(written)),
                    call + " writes " + row.Member("frame").Raw + ", not " + written);
            }
        }

        public static void ServerFramesMatch(JsonValue vectors)
        {
            int read = 0, refused = 0;
            foreach (JsonValue row in vectors.Member("server_frames").Items)
            {
                string text = row.Member("text").String;
                ServerFrame frame;
                string error;
                bool ok = Protocol.TryRead(text, out frame, out error);
                if (row.Member("malformed") != null)
                {
                    Check.True(!ok, "refuses " + text);
                    Check.True(error.Contains("cannot read"), "the reason for refusing " + text + " says so: " + error);
                    refused++;
                    continue;
                }
                Check.True(ok, "reads " + text + ": " + error);
                string seen = Describe(frame);
                Check.True(Json.Same(row.Member("frame"), Json.Parse(seen)), text + " reads as " + seen);
                read++;
            }
            Check.True(read > 0 && refused > 0, "vectors of both kinds");
        }

        /// <summary>A frame as read, written back as JSON with the fields its type has.</summary>
        static string Describe(ServerFrame frame)
        {
            var sb = new StringBuilder("{\"type\":" + Json.Quote(frame.Type));
            switch (frame.Type)
            {
                case "welcome":
                    sb.Append(",\"session\":").Append(Json.Quote(frame.Session))
                        .Append(",\"node\":").Append(Json.Quote(frame.Node))
                        .Append(",\"limits\":{\"max_frame\":").Append(frame.Limits.MaxFrame)
                        .Append(",\"rate_per_second\":").Append(frame.Limits.RatePerSecond)
                        .Append(",\"rate_burst\":").Append(frame.Limits.RateBurst).Append('}');
                    break;
                case "push":
                    sb.Append(",\"actor\":").Append(Json.Quote(frame.Actor))
                        .Append(",\"seq\":").Append(frame.Seq).Append(",\"message\":").Append(frame.Message);
                    break;
                case "delivered":
                case "undelivered":
                    sb.Append(",\"actor\":").Append(Json.Quote(frame.Actor)).Append(",\"inputs\":").Append(frame.Inputs);
                    break;
                case "closing":
                    sb.Append(",\"code\":").Append(Json.Quote(CloseCodes.Name(frame.Code)))
                        .Append(",\"retryable\":").Append(frame.Retryable ? "true" : "false")
                        .Append(",\"reason\":").Append(Json.Quote(frame.Reason));
                    break;
                default:
                    sb.Append(",\"actor\":").Append(Json.Quote(frame.Actor));
                    if (frame.Reason != null) sb.Append(",\"reason\":").Append(Json.Quote(frame.Reason));
                    break;
            }
            return sb.Append('}').ToString();
        }
    }
}
